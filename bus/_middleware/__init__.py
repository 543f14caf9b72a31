"""The middleware: kernel side (intercept, view) and handler side (module, serving), and what both share."""
