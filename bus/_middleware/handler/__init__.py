"""The handler side of the middleware: modules and how they are served."""
