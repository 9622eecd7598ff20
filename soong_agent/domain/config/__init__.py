"""The configuration schema and its pure resolution rules."""
