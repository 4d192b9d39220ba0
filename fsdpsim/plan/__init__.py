"""The plan: parallel degrees, the training configuration, framework profiles, and where groups land
on the network."""
