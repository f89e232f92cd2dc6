"""One run: its description (:class:`~trainmath.runs.description.Run`, checked once), and
:func:`~trainmath.runs.estimates.estimate`, which puts memory and time together for it."""
