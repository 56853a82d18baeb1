"""Recipes: scale-tested configurations, executable."""
