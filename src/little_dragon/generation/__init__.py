"""Generation: k scripts per prompt from any model source (registry URI/alias, run folder, HF dir, chat endpoint).

``sample.generate_attempts`` is the one entry point; ``sources.load_generator`` turns a model source string
into something that generates.  See README.md for the constrained-decoding hook.
"""
