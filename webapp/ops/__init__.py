"""Operations: worker heartbeats, the overview page and the commands that run the stack."""
