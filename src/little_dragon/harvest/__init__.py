"""MetaSchedule harvesting: real ``tune_tir`` runs per workload, their databases, measured candidates and
baselines, collected resumably into one table per target."""
