"""PushT on the PiPER twin: a T block pushed on the table to a goal pose."""
