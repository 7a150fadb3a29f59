"""Producer ids and (in a later release) the transaction coordinator: sans-IO state machines."""
