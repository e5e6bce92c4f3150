"""The operator console (E8, C2, C4): `console.functions`, the app's admin HTTP functions, and
``console/page.html``, the page they serve.

Its command-line client, ``tools.console_cli``, calls the same endpoints and is tooling, left
out of the deployment package. Routes and answers: docs/console.md.
"""
