"""Study 4 (consensus): token dynamics of attention on the sphere, in theory and in SmolLM2.

Modules: `dynamics` (attention drive and tangent field), `schedules` (time-varying weights), `integrators`
(projected RK4, Euler, exponential-map Euler, post-/pre-norm maps), `measures` (spec section 6), `theory`
(equiangular rho-ODE, tail rates), `sweeps` (phase diagram), `realmodel` (iterating a Llama decoder stack),
`plots` and `cli`.
"""
