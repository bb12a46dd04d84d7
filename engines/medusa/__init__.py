"""Medusa-1 style heads on the target (Cai et al. 2024): training, storage, candidate trees."""
