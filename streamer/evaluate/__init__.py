"""Champion against candidate on a replayed range: both scored, compared, reported and gated."""
