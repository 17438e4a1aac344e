"""The one attribution engine (:mod:`~eopt.attribute.engine`): a trace's energy charged to
its events, and the one power integrator it and the meters use
(:mod:`~eopt.attribute.integral`)."""
