"""Offline tools that make the planner's weights: predictor training, LoRA fine-tuning, data generation."""
