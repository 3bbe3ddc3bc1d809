"""The step-time model: a step counted (ops, FLOPs, bytes, the products and element-wise
calls by shape), the machine's rates measured by the rates job, the step's own shapes
replayed on the device, and the model that prices the counts at the rates (its terms,
regime and columns of a timings table). The instruments run inside the measuring job;
nothing here imports a workload or the measuring code."""
