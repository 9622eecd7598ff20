"""Shell command analysis with tree-sitter-bash."""
