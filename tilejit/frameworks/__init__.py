"""Framework integrations: what tilejit knows of each tensor framework, one adapter per
framework, registered with the runtime (``tilejit.runtime.frameworks``)."""
