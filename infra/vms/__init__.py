"""Groups of plain Compute Engine GPU VMs from the environment: the one derivation of their instance properties
(`instance`), which the stack's instance template and the `bulkInsert` request (`bulk`) both take, the start-up
that sets up GPUDirect-TCPXO on Container-Optimized OS, and `make vm-up` / `make vm-down` (`python -m scripts.vms`)."""
