"""A trial that does nothing: measures the runtime's own start-up and import footprint."""


def objective(ctx):
    return None


if __name__ == "__main__":
    import trials

    trials.main(objective)
