"""application package."""
