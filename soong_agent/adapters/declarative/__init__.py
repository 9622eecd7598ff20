"""Declarative tools from ${SOONG_AGENT_HOME}/tools/*.json."""
