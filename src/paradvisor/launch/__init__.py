"""Turning a Plan into a real run: presets, launcher argv, exports, run directories."""
