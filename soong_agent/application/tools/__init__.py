"""Tools: a schema, a handler and a permission class each; the loop dispatches by name."""
