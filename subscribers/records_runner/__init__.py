"""The record runner: stored handler records served as one middleware module (``hookbus runner``)."""
