"""The bindings componentize-py generates from the host's WIT, in one place.

Outside a component (``python -m unittest`` on a project's own tools) they
do not exist: declarations still work there (a tool's schema, a
component's parts), and only calls that reach the host fail.
"""

try:
    from componentize_py_types import Err
    from wit_world.exports import agent_settings, orchestration_inputs
    from wit_world.imports import durable, logging, types

    IN_COMPONENT = True
except ImportError:  # native Python: no host to call
    IN_COMPONENT = False
    agent_settings = orchestration_inputs = durable = logging = types = None

    class Err(Exception):
        """Stands in for componentize-py's ``Err``: a result's error value."""

        def __init__(self, value):
            super().__init__(value)
            self.value = value
