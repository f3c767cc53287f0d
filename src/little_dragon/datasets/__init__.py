"""SFT datasets: construction and refinement examples from harvests, group splits and the sealed set."""
