"""`python -m a800lab report`: every checkable sentence of the tuning guide, cited, tested on this
machine, and the machine's health. A claim is data plus its judge, defined once in compute,
training, systems or documented; register.REGISTER holds them all in the guide's order."""
