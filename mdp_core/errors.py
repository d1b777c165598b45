"""Exception types. Every user-facing error is one of these, with a one-line message."""


class MdpError(Exception):
    """Base class of every error mdp_core raises on purpose."""


class InputError(MdpError, ValueError):
    """Bad input: wrong schema, NaN, out-of-range parameter, unreadable file, ..."""


class SolverError(MdpError, RuntimeError):
    """The LP solver did not return a usable solution (infeasible, time limit, error)."""


class PrivacyError(MdpError):
    """A mechanism violates its mDP constraints and could not be repaired: it must not be released."""
