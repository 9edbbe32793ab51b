def number(text, where):
    """The finite number a CSV cell holds, or a ValueError saying `where` it is."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} in {where} is not a number") from None
    # float() takes "nan" and "inf": a model normalized with them trains on NaN.
    if not np.isfinite(value):
        raise ValueError(f"{text!r} in {where} is not a finite number")
    return value
