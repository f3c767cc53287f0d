from dataset_fixtures import built, harvested, token_counter  # noqa: F401  (shared session fixtures)
