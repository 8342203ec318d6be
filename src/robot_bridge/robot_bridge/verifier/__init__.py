"""OmniAct's asynchronous visual verifier: frames compared without the plan, then checked against the step."""
