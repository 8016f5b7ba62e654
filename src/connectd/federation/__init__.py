"""Federation's shell: the box key file, sealing and opening envelopes (the only code that touches
``nacl``), and later the NATS bus, its loops and provisioning (docs/federation.md, "Where the code
goes"). It executes and reports; ``connectcore.federation`` decides.
"""
