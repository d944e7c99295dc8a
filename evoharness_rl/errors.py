"""Errors a user can fix (bad data, wrong path, stale dataset): the CLI prints them without a traceback."""


class UserError(Exception):
    """Base of every error whose message tells the user what to change."""


class Refusal(UserError):
    """A job that refuses to start (its out_dir holds another run, or is in use): it writes nothing there."""

    @classmethod
    def of(cls, err: Exception) -> "Refusal":
        """`err` (found before anything was written) as a Refusal, its message on one line."""
        return err if isinstance(err, cls) else cls(" ".join(str(err).split()))
