"""The package version, kept apart so that modules needing it do not import the whole public API."""

__version__ = "0.1.0"
