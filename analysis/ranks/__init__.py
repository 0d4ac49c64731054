"""Ranks side by side: one trace per rank, or one capture around a whole torchrun job."""
