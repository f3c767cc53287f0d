"""Operations: the local services (Prefect and MLflow servers with their UIs) and the retraining schedule."""
