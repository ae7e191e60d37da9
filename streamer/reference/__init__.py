"""The generated reference pages: docs/configuration.md and docs/errors.md, read off the source."""
