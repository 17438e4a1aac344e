"""The simulated GPU: a physical model on virtual time, its kernels, mechanisms and fit."""
