"""The operator console (E8, C2, C4): admin HTTP functions, the page they serve, and a CLI.

``console.functions`` is the app's blueprint: thin HTTP functions over
``services.operator`` (and ``services.dead_letters`` when present), function-key auth, JSON
in and out, under ``api/console/...`` (Azure reserves routes that start with ``admin``).
``console/page.html`` is the page ``GET api/console`` serves. ``console.cli``
(``python -m tools.console_cli``) calls the same endpoints with a function key; it is tooling and is
left out of the deployment package.
"""
