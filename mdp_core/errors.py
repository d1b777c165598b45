"""Exception types. Every user-facing error is one of these, with a one-line message."""


class MdpError(Exception):
    """Base class of every error mdp_core raises on purpose."""


class InputError(MdpError, ValueError):
    """Bad input: wrong schema, NaN, out-of-range parameter, unreadable file, ..."""


class SecretTableError(InputError):
    """A problem of the secret table (the agency's microdata) found while a release runs. ``str()`` is the
    public message -- what kind of problem and where to look (``mdp-release check``) --
    which reaches the terminal, Prefect's state message and logs, and the failure record; never how many
    people, which rows or values. ``detail``: the same with the counts and row numbers, for the operator only (``mdp-release check``'s
    terminal, ``<store>/private/failures/``). A pickled copy (Prefect's persisted results) keeps only the
    public message."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail or message

    def __reduce__(self) -> tuple:  # the public message only: the detail never leaves this process
        return (type(self), (str(self),))


class SolverError(MdpError, RuntimeError):
    """The LP solver did not return a usable solution (infeasible, time limit, error)."""


class PrivacyError(MdpError):
    """A mechanism violates its mDP constraints and could not be repaired: it must not be released."""


class Interrupted(MdpError):
    """A computation stopped on request (SIGTERM, SIGINT, UI Cancel) before it finished; nothing was
    written. ``stage``: the stage it belonged to; ``reason``: why; ``state``: its last progress line."""

    def __init__(self, message: str, stage: str = "", reason: str = "", state: str = "") -> None:
        super().__init__(message)
        self.stage, self.reason, self.state = stage, reason, state

    def __reduce__(self) -> tuple:  # picklable with its fields (Prefect stores and ships exceptions)
        return (type(self), (str(self), self.stage, self.reason, self.state))


class StageTimeout(Interrupted, TimeoutError):
    """A stage ran past its timeout: its computation stopped itself. A ``TimeoutError``, so Prefect
    records the task run as TimedOut and the command line reports a timeout."""
