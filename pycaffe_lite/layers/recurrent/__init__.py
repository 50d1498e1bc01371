"""Recurrent layers: Caffe's RecurrentLayer base with its LSTM and RNN architectures, and the
LSTMUnit cell that computes one LSTM time step."""
