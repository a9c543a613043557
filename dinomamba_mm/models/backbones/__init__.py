from .dinovim import DinoMambaReg, DinoVim

__all__ = ['DinoVim', 'DinoMambaReg']
