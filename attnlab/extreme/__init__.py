"""Study 1: extreme-token phenomena on the Bigram-Backcopy task (metrics, interventions, theory)."""
