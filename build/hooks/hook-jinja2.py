"""jinja2: chat templates run in the sandbox with the loopcontrols extension, which jinja2 resolves by name."""
hiddenimports = ["jinja2.ext", "jinja2.sandbox"]
