"""The real-models study (spec extreme-tokens on real models) is the rooms scan, series, ablate and deploy
(`attnlab.scan`, `attnlab.series`, `attnlab.ablate`, `attnlab.deploy`); this package holds its reproduction
(`attnlab.real.repro`), which is not a command of its own."""
