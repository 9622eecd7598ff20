"""One room for a run: what it is (`lineage`), the one way it starts (`starter`), what binds it
(`policy`), how it is put together (`assembler`) and the root runs' service (`service`)."""
