"""Names the conversion writes into IR text for the lowering to find again: the one place both stages
agree on, so neither imports the other."""

# tt.atomic_cas becomes a call to `<CAS_FUNCTION>.<element type>`; after bufferization the lowering
# replaces each call with a memref.generic_atomic_rmw (compiler/atomic_expansion.py), which bufferization
# could not see through had it been emitted directly.
CAS_FUNCTION = "spine.atomic_cas"
