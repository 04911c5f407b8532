"""Errors the catalogue raises."""


class ShapeError(ValueError):
    """A slice shape the catalogue does not allow.

    `field` names the environment-file key at fault (``accelerator``,
    ``topology``, ``machine_type`` or ``nodes``) so the loader can point at it.
    """

    def __init__(self, field: str, value: object, message: str, allowed: list[str]) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{message}; allowed: {', '.join(allowed)}" if allowed else message)
