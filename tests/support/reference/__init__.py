"""PyTorch reference implementations (minicpmo-utils 1.0.7 stepaudio2) loaded with the weights
our generator wrote, for parity tests. See docs/reference-parity.md."""
