"""The ``emq`` command. Environment variables and import strings are read only here."""
