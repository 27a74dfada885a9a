"""`attnlab view`: a run's report served on 127.0.0.1, with scan patterns recomputed on demand."""
