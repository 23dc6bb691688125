"""Dialect tables shared by C++-like kernel languages (SYCL, MSL): ``cstyle.CStyleLanguage`` holds
the rules, one subclass per dialect (``sycl.SyclLanguage``, ``msl.MslLanguage``) holds its spellings."""

from inductor_ext.templates.lang.cstyle import CStyleLanguage, dtype_name
from inductor_ext.templates.lang.msl import MSL, MslLanguage
from inductor_ext.templates.lang.sycl import SYCL, SyclLanguage

__all__ = ["CStyleLanguage", "MSL", "MslLanguage", "SYCL", "SyclLanguage", "dtype_name"]
