"""What soniq 0.1.0 code still relies on, kept apart from the app's own code.

`settings`: 0.1.0's setting names and ``.env`` file. `hooks`: ``@app.before_job``,
``@app.after_job``, ``@app.on_error`` and ``@app.middleware``. `app`: the `Soniq` methods and
constructor arguments 0.1.0 had (`schedule`, `is_initialized`, metrics sinks with 0.1.0's
keywords, backends by name, jobs of other services by name, ...), as a mixin of `Soniq`.
Nothing here is imported by this package's ``__init__``: `soniq.settings` needs `settings`
without the rest.
"""
