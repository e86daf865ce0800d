"""Pictures of models and plans (matplotlib, headless)."""
