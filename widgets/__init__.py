"""Reusable Qt widgets that draw step events; they never touch a model runtime."""
