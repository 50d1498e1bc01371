"""Neuron layers."""
