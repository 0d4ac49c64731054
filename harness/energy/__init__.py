"""Energy: power sensors sampled during a run and the energy a run used."""
