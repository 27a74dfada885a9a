"""The training layer: one loop (`loop`) and its checkpoint format (`checkpoint`: safetensors plus JSON)."""
